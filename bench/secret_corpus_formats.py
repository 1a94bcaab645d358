"""A secret corpus of real configuration and command formats, with generated secrets.

    python bench/secret_corpus_formats.py [--out bench/data/secret_corpus_formats.jsonl]

The first corpus (`bench/secret_corpus.py`) is gitleaks' rule tests: mostly `name = "token"`
lines in a dozen syntaxes. This one is the files, commands and sentences secrets really travel
in, written here from the formats' own documentation (nothing copied from a scanner's tests):
Kubernetes Secrets and ConfigMaps, Docker's config.json, .npmrc, .pypirc, pip.conf,
.git-credentials, .netrc, ~/.aws/credentials, a gcloud service-account key, Terraform,
Ansible, Jenkins' credentials.xml, Maven's settings.xml, NuGet.Config, composer's auth.json,
.env files, shell history, CI logs; connection strings of databases and brokers (JDBC,
ODBC, ADO.NET, libpq, MongoDB SRV, AMQP, Redis, Kafka's JAAS, Go's MySQL DSN, Snowflake,
NATS, MQTT); cloud and cluster command lines (az, aws, kubectl, helm, docker, vault,
terraform, wget, git, PowerShell, Windows' net use and cmdkey); code that passes a credential
to a call (setters, requests' auth tuples, DB connect calls, lookups with a literal default);
SQL; password hashes; prose in many languages; and secrets that are JSON-escaped,
URL-encoded, HTML-escaped, base64-wrapped or split over lines.

Secrets are drawn from a seeded generator in each format's alphabet (passwords mix cases,
digits and symbols; tokens carry their vendor's prefix and length), so the file is the same
on every run. Each family is one format; half of the families (by a hash of the name) are
`held_out`: never looked at while memflow's detectors are fixed, reported apart.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import random
import string
import urllib.parse
from collections.abc import Callable
from pathlib import Path

from secret_corpus import write_corpus

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "data" / "secret_corpus_formats.jsonl"
PER_FAMILY = 6
ALNUM = string.ascii_letters + string.digits
B64 = ALNUM + "+/"
HEX = "0123456789abcdef"
BECH32 = "QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L"

Make = Callable[[random.Random], tuple[str, str]]
FAMILIES: dict[str, Make] = {}


def family(name: str) -> Callable[[Make], Make]:
    def add(make: Make) -> Make:
        assert name not in FAMILIES, name
        FAMILIES[name] = make
        return make

    return add


def split_of(name: str) -> str:
    return "held_out" if int(hashlib.sha256(name.encode()).hexdigest(), 16) % 2 else "tuning"


# --- values -----------------------------------------------------------------------------------


def chars(r: random.Random, n: int, alphabet: str = ALNUM) -> str:
    return "".join(r.choice(alphabet) for _ in range(n))


def mixed(r: random.Random, n: int, alphabet: str = ALNUM) -> str:
    """n characters of the alphabet holding an upper, a lower case letter and a digit."""
    while True:
        v = chars(r, n, alphabet)
        kinds = (str.isupper, str.islower, str.isdigit)
        if all(any(k(c) for c in v) for k in kinds):
            return v


def pw(r: random.Random, symbols: str = "!#%+-_.") -> str:
    """A password as people make them: letters, digits and a symbol or two."""
    while True:
        n = r.randint(10, 18)
        v = chars(r, n - 2) + r.choice(symbols) + chars(r, 1, string.digits)
        v = "".join(r.sample(v, len(v)))
        if any(c.isupper() for c in v) and any(c.islower() for c in v) and v[0].isalnum():
            return v


def b64(data: str) -> str:
    return base64.b64encode(data.encode()).decode()


def pem_body(r: random.Random) -> str:
    head = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQ"
    return head + mixed(r, 14, B64)


def user(r: random.Random) -> str:
    return r.choice(["app", "deploy", "svc_billing", "admin", "ci-bot", "etl", "api"])


def host(r: random.Random) -> str:
    return r.choice(["db.internal", "10.0.3.17", "pg-prod-1", "mysql.svc.cluster.local"])


def token(r: random.Random) -> str:
    kind = r.randrange(6)
    if kind == 0:
        return "ghp_" + mixed(r, 36)
    if kind == 1:
        return "glpat-" + mixed(r, 20, ALNUM + "_-")
    if kind == 2:
        return "sk_live_" + mixed(r, 32)
    if kind == 3:
        digits = chars(r, 12, string.digits) + "-" + chars(r, 13, string.digits)
        return f"xoxb-{digits}-{mixed(r, 24)}"
    if kind == 4:
        return "npm_" + mixed(r, 36)
    return "AKIA" + chars(r, 16, string.ascii_uppercase + string.digits)


# --- configuration files ------------------------------------------------------------------------


@family("k8s-secret-stringdata")
def _(r):
    p = pw(r)
    return (f"apiVersion: v1\nkind: Secret\nmetadata:\n  name: db-creds\n  namespace: prod\n"
            f"type: Opaque\nstringData:\n  username: {user(r)}\n  password: {p}\n"), p  # fmt: skip


@family("k8s-secret-data-base64")
def _(r):
    v = b64(pw(r))
    return (f"apiVersion: v1\nkind: Secret\nmetadata:\n  name: api\ndata:\n  API_PASSWORD: {v}\n"
            "  LOG_LEVEL: aW5mbw==\n"), v  # fmt: skip


@family("k8s-configmap-properties")
def _(r):
    p = pw(r)
    return (f"kind: ConfigMap\ndata:\n  application.properties: |\n    server.port=8080\n"
            f"    spring.datasource.url=jdbc:postgresql://db:5432/app\n"
            f"    spring.datasource.password={p}\n"), p  # fmt: skip


@family("docker-config-json")
def _(r):
    v = b64(f"{user(r)}:{pw(r)}")
    return json.dumps({"auths": {"ghcr.io": {"auth": v}}}, indent=2), v


@family("npmrc-authtoken")
def _(r):
    t = "npm_" + mixed(r, 36)
    return f"registry=https://registry.npmjs.org/\n//registry.npmjs.org/:_authToken={t}\n", t


@family("npmrc-auth-base64")
def _(r):
    v = b64(f"{user(r)}:{pw(r)}")
    return f"registry=https://npm.corp.example/\n_auth={v}\nalways-auth=true\n", v


@family("pypirc-token")
def _(r):
    t = "pypi-AgEIcHlwaS5vcmc" + mixed(r, 60, ALNUM + "_-")
    return f"[distutils]\nindex-servers = pypi\n\n[pypi]\nusername = __token__\npassword = {t}\n", t


@family("pypirc-password")
def _(r):
    p = pw(r)
    return (f"[internal]\nrepository = https://pypi.corp.example/\nusername = {user(r)}\n"
            f"password = {p}\n"), p  # fmt: skip


@family("pip-conf-index-url")
def _(r):
    p = pw(r, "!-_.~")
    return f"[global]\nindex-url = https://{user(r)}:{p}@pypi.corp.example/simple\n", p


@family("git-credentials")
def _(r):
    t = "ghp_" + mixed(r, 36)
    return f"https://{user(r)}:{t}@github.com\n", t


@family("netrc-multiline")
def _(r):
    p = pw(r)
    return f"machine api.example.com\n    login {user(r)}\n    password {p}\n", p


@family("aws-credentials-file")
def _(r):
    s = mixed(r, 40, B64)
    return (f"[default]\naws_access_key_id = AKIA{chars(r, 16, string.ascii_uppercase)}\n"
            f"aws_secret_access_key = {s}\nregion = eu-west-1\n"), s  # fmt: skip


@family("aws-session-token")
def _(r):
    t = "IQoJb3JpZ2luX2VjE" + mixed(r, 200, B64)
    return f"[temp]\naws_session_token = {t}\n", t


@family("gcloud-service-account-key-id")
def _(r):
    k = chars(r, 40, HEX)
    doc = {"type": "service_account", "project_id": "acme-prod", "private_key_id": k,
           "client_email": "ci@acme-prod.iam.gserviceaccount.com"}  # fmt: skip
    return json.dumps(doc, indent=2), k


@family("gcloud-service-account-private-key")
def _(r):
    body = pem_body(r)
    key = f"-----BEGIN PRIVATE KEY-----\n{body}\n-----END PRIVATE KEY-----\n"
    doc = {"type": "service_account", "private_key": key}
    return json.dumps(doc), body


@family("terraform-tfvars")
def _(r):
    p = pw(r)
    return f'region      = "eu-west-1"\ndb_username = "{user(r)}"\ndb_password = "{p}"\n', p


@family("terraform-provider-block")
def _(r):
    s = mixed(r, 40, B64)
    return (f'provider "aws" {{\n  region     = "us-east-1"\n  access_key = "AKIA'
            f'{chars(r, 16, string.ascii_uppercase)}"\n  secret_key = "{s}"\n}}\n'), s  # fmt: skip


@family("ansible-inventory")
def _(r):
    p = pw(r)
    return f"[web]\nweb1 ansible_host=10.0.0.5 ansible_user=deploy ansible_password={p}\n", p


@family("ansible-become-pass-yaml")
def _(r):
    p = pw(r)
    return f"all:\n  vars:\n    ansible_become_pass: '{p}'\n", p


@family("jenkins-credentials-xml")
def _(r):
    p = pw(r)
    return ("<com.cloudbees.plugins.credentials.impl.UsernamePasswordCredentialsImpl>\n"
            "  <scope>GLOBAL</scope>\n  <id>deploy</id>\n  <username>deploy</username>\n"
            f"  <password>{p}</password>\n"
            "</com.cloudbees.plugins.credentials.impl.UsernamePasswordCredentialsImpl>"
            ), p  # fmt: skip


@family("maven-settings-xml")
def _(r):
    p = pw(r)
    return (f"<servers>\n  <server>\n    <id>nexus</id>\n    <username>{user(r)}</username>\n"
            f"    <password>{p}</password>\n  </server>\n</servers>"), p  # fmt: skip


@family("nuget-config")
def _(r):
    p = pw(r)
    return ("<packageSourceCredentials>\n  <corp>\n    <add key=\"Username\" value=\"ci\" />\n"
            f"    <add key=\"ClearTextPassword\" value=\"{p}\" />\n  </corp>\n"
            "</packageSourceCredentials>"), p  # fmt: skip


@family("composer-auth-json")
def _(r):
    p = pw(r)
    doc = {"http-basic": {"repo.example.org": {"username": user(r), "password": p}}}
    return json.dumps(doc), p


@family("gradle-properties")
def _(r):
    p = pw(r)
    return f"signing.keyId=24875D73\nsigning.password={p}\nossrhUsername=me\n", p


@family("dotenv-file")
def _(r):
    t = "sk_live_" + mixed(r, 32)
    return f"NODE_ENV=production\nSTRIPE_SECRET_KEY={t}\nPORT=3000\n", t


@family("dotenv-quoted-jwt-secret")
def _(r):
    s = chars(r, 64, HEX)
    return f'APP_NAME="shop"\nJWT_SECRET="{s}"\n', s


@family("django-secret-key")
def _(r):
    s = "django-insecure-" + chars(r, 50, string.ascii_lowercase + string.digits + "!@#$%^&*(-_=+)")
    return f"SECRET_KEY = '{s}'\nDEBUG = False\n", s


@family("rails-secret-key-base")
def _(r):
    s = chars(r, 128, HEX)
    return f"production:\n  secret_key_base: {s}\n", s


@family("wp-config-define")
def _(r):
    p = pw(r)
    return f"define( 'DB_NAME', 'wp' );\ndefine( 'DB_PASSWORD', '{p}' );\n", p


@family("s3cfg")
def _(r):
    s = mixed(r, 40, B64)
    key_id = "AKIA" + chars(r, 16, string.ascii_uppercase)
    return f"[default]\naccess_key = {key_id}\nsecret_key = {s}\n", s


@family("rclone-conf")
def _(r):
    s = mixed(r, 40, B64)
    return (f"[s3remote]\ntype = s3\nprovider = AWS\naccess_key_id = AKIA"
            f"{chars(r, 16, string.ascii_uppercase)}\nsecret_access_key = {s}\n"), s  # fmt: skip


@family("git-config-remote-url")
def _(r):
    p = pw(r, "!-_.~")
    return f'[remote "origin"]\n\turl = https://{user(r)}:{p}@git.corp.example/team/app.git\n', p


@family("cargo-credentials")
def _(r):
    t = "cio" + mixed(r, 32)
    return f'[registry]\ntoken = "{t}"\n', t


@family("yarnrc-yml")
def _(r):
    t = "npm_" + mixed(r, 36)
    return f'npmRegistryServer: "https://registry.npmjs.org"\nnpmAuthToken: "{t}"\n', t


@family("supervisor-conf")
def _(r):
    p = pw(r)
    return f"[inet_http_server]\nport=127.0.0.1:9001\nusername=admin\npassword={p}\n", p


@family("nginx-basic-auth-header")
def _(r):
    v = b64(f"{user(r)}:{pw(r)}")
    return f'location / {{\n    proxy_set_header Authorization "Basic {v}";\n}}\n', v


@family("docker-compose-env-list")
def _(r):
    p = pw(r)
    head = "services:\n  db:\n    image: mysql:8\n    environment:\n"
    return f"{head}      - MYSQL_ROOT_PASSWORD={p}\n", p


@family("docker-compose-env-map")
def _(r):
    p = pw(r)
    head = "services:\n  pg:\n    environment:\n      POSTGRES_USER: app\n"
    return f"{head}      POSTGRES_PASSWORD: {p}\n", p


@family("yaml-folded-scalar")
def _(r):
    p = pw(r)
    return f"database:\n  user: app\n  password: >-\n    {p}\n", p


@family("toml-section")
def _(r):
    p = pw(r)
    return f'[database]\nhost = "{host(r)}"\npassword = "{p}"\n', p


@family("ini-section")
def _(r):
    p = pw(r)
    return f"[mysql]\nhost={host(r)}\nuser={user(r)}\npasswd={p}\n", p


@family("spring-yaml")
def _(r):
    p = pw(r)
    return f"spring:\n  datasource:\n    username: app\n    password: {p}\n", p


@family("xml-property-value")
def _(r):
    p = pw(r)
    return f'<property name="connection.password" value="{p}"/>', p


@family("htpasswd-bcrypt")
def _(r):
    h = "$2y$10$" + chars(r, 53, ALNUM + "./")
    return f"admin:{h}\n", h


@family("shadow-sha512")
def _(r):
    h = "$6$" + chars(r, 16, ALNUM + "./") + "$" + chars(r, 86, ALNUM + "./")
    return f"root:{h}:19700:0:99999:7:::\n", h


# --- shell history, CI logs -------------------------------------------------------------------


@family("shell-history-export")
def _(r):
    t = "ghp_" + mixed(r, 36)
    return f"  511  cd ~/src/app\n  512  export GITHUB_TOKEN={t}\n  513  gh pr list\n", t


@family("shell-history-pgpassword")
def _(r):
    p = pw(r)
    return f"  88  PGPASSWORD='{p}' pg_dump -h {host(r)} -U app app > app.sql\n", p


@family("ci-log-curl-token-header")
def _(r):
    t = "ghs_" + mixed(r, 36)
    return (f'2026-11-30T10:00:01.123Z + curl -sSf -H "Authorization: token {t}" '
            "https://api.github.com/repos/acme/app/releases\n"), t  # fmt: skip


@family("ci-log-docker-login")
def _(r):
    p = pw(r)
    return f"$ docker login -u gitlab-ci-token -p {p} registry.gitlab.com\nLogin Succeeded\n", p


@family("ci-log-private-token-header")
def _(r):
    t = "glpat-" + mixed(r, 20)
    return f'curl --header "PRIVATE-TOKEN: {t}" "https://gitlab.example.com/api/v4/projects"', t


@family("ci-log-x-api-key-header")
def _(r):
    t = mixed(r, 40)
    return f"curl -s -H 'x-api-key: {t}' https://api.example.com/v2/items", t


# --- connection strings -----------------------------------------------------------------------


@family("jdbc-postgres-query")
def _(r):
    p = pw(r)
    return f"jdbc:postgresql://{host(r)}:5432/app?user=app&password={p}&ssl=true", p


@family("jdbc-mysql-query")
def _(r):
    p = pw(r)
    return f"jdbc:mysql://{host(r)}:3306/app?user=root&password={p}&useSSL=false", p


@family("jdbc-sqlserver")
def _(r):
    p = pw(r)
    return f"jdbc:sqlserver://{host(r)}:1433;databaseName=app;user=sa;password={p};encrypt=true", p


@family("jdbc-oracle-thin")
def _(r):
    p = pw(r, "_#")
    return f"jdbc:oracle:thin:scott/{p}@//{host(r)}:1521/ORCLPDB1", p


@family("odbc-connection-string")
def _(r):
    p = pw(r)
    return (f"Driver={{ODBC Driver 18 for SQL Server}};Server=tcp:{host(r)},1433;Database=app;"
            f"Uid=sa;Pwd={p};Encrypt=yes;"), p  # fmt: skip


@family("adonet-connection-string")
def _(r):
    p = pw(r)
    return f"Server={host(r)};Database=app;User Id=sa;Password={p};TrustServerCertificate=True;", p


@family("adonet-azure-sql")
def _(r):
    p = pw(r)
    return ("Server=tcp:acme.database.windows.net,1433;Initial Catalog=app;Persist Security "
            f"Info=False;User ID=app;Password={p};MultipleActiveResultSets=False;"), p  # fmt: skip


@family("mongodb-srv")
def _(r):
    p = pw(r, "-_.~")
    return f"mongodb+srv://app:{p}@cluster0.ab1cd.mongodb.net/app?retryWrites=true&w=majority", p


@family("amqps-url")
def _(r):
    p = pw(r, "-_.~")
    return f"amqps://app:{p}@rabbit.internal:5671/%2Fprod", p


@family("rediss-url")
def _(r):
    p = pw(r, "-_.~")
    return f"rediss://default:{p}@redis-12345.c1.us-east-1-2.ec2.cloud.redislabs.com:12345", p


@family("redis-url-no-user")
def _(r):
    p = pw(r, "-_.~")
    return f"REDIS_URL=redis://:{p}@cache:6379/0", p


@family("kafka-jaas-plain")
def _(r):
    p = pw(r)
    return ("sasl.mechanism=PLAIN\nsasl.jaas.config=org.apache.kafka.common.security.plain."
            f'PlainLoginModule required username="app" password="{p}";'), p  # fmt: skip


@family("kafka-jaas-scram-single-quotes")
def _(r):
    p = pw(r)
    return ("sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
            f"username='app' password='{p}';"), p  # fmt: skip


@family("azure-storage-connection-string")
def _(r):
    k = mixed(r, 86, B64) + "=="
    return (f"DefaultEndpointsProtocol=https;AccountName=acmeprod;AccountKey={k};"
            "EndpointSuffix=core.windows.net"), k  # fmt: skip


@family("azure-service-bus")
def _(r):
    k = mixed(r, 43, B64) + "="
    return ("Endpoint=sb://acme.servicebus.windows.net/;SharedAccessKeyName=RootManageSharedAccessKey;"
            f"SharedAccessKey={k}"), k  # fmt: skip


@family("libpq-keyword-value")
def _(r):
    p = pw(r)
    return f"host={host(r)} port=5432 dbname=app user=app password={p} sslmode=require", p


@family("go-mysql-dsn")
def _(r):
    p = pw(r, "!#%+-_")
    return f'dsn := "app:{p}@tcp({host(r)}:3306)/app?parseTime=true"', p


@family("snowflake-url")
def _(r):
    p = pw(r, "-_.~")
    return f"snowflake://etl:{p}@xy12345.eu-central-1/analytics/public?warehouse=wh", p


@family("sqlalchemy-mssql")
def _(r):
    p = pw(r, "-_.~")
    return f"mssql+pyodbc://sa:{p}@db:1433/app?driver=ODBC+Driver+18+for+SQL+Server", p


@family("neo4j-auth-env")
def _(r):
    p = pw(r)
    return f"docker run -e NEO4J_AUTH=neo4j/{p} -p 7474:7474 neo4j:5", p


@family("nats-url")
def _(r):
    p = pw(r, "-_.~")
    return f"nats://app:{p}@nats.internal:4222", p


@family("mqtt-url")
def _(r):
    p = pw(r, "-_.~")
    return f"MQTT_BROKER=mqtt://iot:{p}@broker.local:1883", p


@family("https-proxy-env")
def _(r):
    p = pw(r, "-_.~")
    return f"export https_proxy=http://{user(r)}:{p}@proxy.corp:3128", p


# --- cloud and cluster command lines ----------------------------------------------------------


@family("az-login-service-principal")
def _(r):
    p = mixed(r, 3) + "8Q~" + mixed(r, 34, ALNUM + "_~.-")
    return (f"az login --service-principal -u 3f1c2e9a-1111-4b1a-9c3e-2a7d9e0f1b2c -p {p} "
            "--tenant 72f988bf-86f1-41af-91ab-2d7cd011db47"), p  # fmt: skip


@family("aws-configure-set")
def _(r):
    s = mixed(r, 40, B64)
    return f"aws configure set aws_secret_access_key {s} --profile prod", s


@family("kubectl-from-literal")
def _(r):
    p = pw(r)
    head = "kubectl create secret generic db --from-literal=username=app"
    return f"{head} --from-literal=password={p}", p


@family("kubectl-docker-registry")
def _(r):
    p = pw(r)
    return (f"kubectl create secret docker-registry regcred --docker-server=ghcr.io "
            f"--docker-username=bot --docker-password={p}"), p  # fmt: skip


@family("helm-set-password")
def _(r):
    p = pw(r)
    return f"helm upgrade --install pg bitnami/postgresql --set auth.postgresPassword={p}", p


@family("docker-run-env")
def _(r):
    p = pw(r)
    return f"docker run -d -e POSTGRES_PASSWORD={p} -p 5432:5432 postgres:16", p


@family("vault-kv-put")
def _(r):
    p = pw(r)
    return f"vault kv put secret/app/db username=app password={p}", p


@family("heroku-config-set")
def _(r):
    t = "sk_live_" + mixed(r, 32)
    return f"heroku config:set STRIPE_API_KEY={t} -a shop", t


@family("terraform-var-flag")
def _(r):
    p = pw(r)
    return f'terraform apply -var="db_password={p}" -auto-approve', p


@family("wget-password-flag")
def _(r):
    p = pw(r)
    return f"wget --user=admin --password={p} https://files.example.com/backup.tgz", p


@family("git-clone-token-url")
def _(r):
    t = "ghs_" + mixed(r, 36)
    return f"git clone https://x-access-token:{t}@github.com/acme/app.git", t


@family("ssh-keygen-passphrase")
def _(r):
    p = pw(r)
    return f"ssh-keygen -t ed25519 -N '{p}' -f ~/.ssh/deploy", p


@family("openssl-passout")
def _(r):
    p = pw(r)
    return f"openssl pkcs12 -export -in cert.pem -inkey key.pem -out b.p12 -passout pass:{p}", p


@family("powershell-securestring")
def _(r):
    p = pw(r)
    return f'$pw = ConvertTo-SecureString "{p}" -AsPlainText -Force', p


@family("windows-net-use")
def _(r):
    p = pw(r)
    return f"net use Z: \\\\fs01\\share /user:CORP\\svc_backup {p} /persistent:no", p


@family("windows-cmdkey")
def _(r):
    p = pw(r)
    return f"cmdkey /add:fs01.corp.local /user:CORP\\svc {p!s}".replace(f" {p}", f" /pass:{p}"), p


@family("nmcli-wifi")
def _(r):
    p = pw(r)
    return f"nmcli dev wifi connect Office-5G password {p}", p


@family("mongosh-uri")
def _(r):
    p = pw(r, "-_.~")
    return f'mongosh "mongodb://admin:{p}@localhost:27017/admin?authSource=admin"', p


@family("sqlcmd-quoted")
def _(r):
    p = pw(r)
    return f"sqlcmd -S {host(r)} -U sa -P '{p}' -Q \"SELECT 1\"", p


# --- code -------------------------------------------------------------------------------------


@family("java-setter")
def _(r):
    p = pw(r)
    head = 'HikariConfig cfg = new HikariConfig();\ncfg.setUsername("app");\n'
    return f'{head}cfg.setPassword("{p}");', p


@family("csharp-network-credential")
def _(r):
    p = pw(r)
    return f'var cred = new NetworkCredential("svc_mail", "{p}");', p


@family("python-requests-auth-tuple")
def _(r):
    p = pw(r)
    return f'r = requests.get(url, auth=("admin", "{p}"), timeout=10)', p


@family("python-smtp-login")
def _(r):
    p = pw(r)
    return f'server.login("alerts@acme.example", "{p}")', p


@family("php-mysqli-connect")
def _(r):
    p = pw(r)
    return f'$db = mysqli_connect("{host(r)}", "root", "{p}", "shop");', p


@family("python-getenv-default")
def _(r):
    p = pw(r)
    return f'DB_PASSWORD = os.getenv("DB_PASSWORD", "{p}")', p


@family("node-env-fallback")
def _(r):
    p = pw(r)
    return f"const password = process.env.DB_PASSWORD || '{p}';", p


@family("php-laravel-env-default")
def _(r):
    p = pw(r)
    return f"'password' => env('DB_PASSWORD', '{p}'),", p


@family("shell-parameter-default")
def _(r):
    p = pw(r)
    return f"POSTGRES_PASSWORD=${{POSTGRES_PASSWORD:-{p}}}", p


@family("curl-setopt-c")
def _(r):
    t = mixed(r, 48, ALNUM + "-_")
    return f'curl_easy_setopt(curl, CURLOPT_XOAUTH2_BEARER, "{t}");', t


@family("sql-create-user")
def _(r):
    p = pw(r)
    return f"CREATE USER reporting WITH PASSWORD '{p}';", p


@family("sql-alter-login")
def _(r):
    p = pw(r)
    return f"ALTER LOGIN sa WITH PASSWORD = '{p}';", p


@family("sql-set-password-mysql")
def _(r):
    p = pw(r)
    return f"SET PASSWORD FOR 'app'@'%' = '{p}';", p


# --- prose ------------------------------------------------------------------------------------

_PROSE = {
    "prose-en-use-as": "just use {p} as the password for now",
    "prose-en-creds-pair": "creds for the staging box are admin / {p}",
    "prose-en-its": "the root password? it's {p}",
    "prose-en-login-pass": "login: deploy, pass: {p}",
    "prose-es": "la contraseña del servidor es {p}",
    "prose-pt": "a senha do banco é {p}",
    "prose-ja": "DBのパスワードは{p}です",
    "prose-zh": "服务器密码：{p}",
    "prose-tr": "sunucu şifresi: {p}",
    "prose-pl": "hasło do bazy to {p}",
    "prose-nl": "het wachtwoord is {p}",
    "prose-sv": "lösenordet är {p}",
    "prose-uk": "пароль до сервера: {p}",
    "prose-ar": "كلمة المرور هي {p}",
    "prose-ko": "비밀번호는 {p} 입니다",
    "prose-fr-nbsp": "le mot de passe\u00a0: {p}",
    "prose-de-compound": "das Datenbankpasswort lautet {p}",
    "prose-it": "la password del database è {p}",
    "prose-ru-dash": "пароль — {p}",
    "prose-id": "kata sandi wifi adalah {p}",
}
for _name, _template in _PROSE.items():
    family(_name)(lambda r, t=_template: (lambda p: (t.format(p=p), p))(pw(r)))


# --- encoded, escaped, split ------------------------------------------------------------------


@family("json-escaped-env-in-command")
def _(r):
    p = pw(r)
    inner = f'export DB_PASSWORD="{p}" && ./migrate'
    return json.dumps({"tool_input": {"command": inner}}), p


@family("json-in-json-string")
def _(r):
    p = pw(r)
    inner = json.dumps({"user": "app", "password": p})
    return json.dumps({"body": inner}), p


@family("form-urlencoded-body")
def _(r):
    p = pw(r, "@#&=+!")
    enc = urllib.parse.quote(p, safe="")
    return f"POST /login\n\nusername=alice&password={enc}&remember=1", enc


@family("url-encoded-query-token")
def _(r):
    t = mixed(r, 32)
    q = urllib.parse.quote(f"ts=1395782596&token={t}&v=3", safe="")
    return f"https://api.example.com/cb?state={q}", t


@family("html-escaped-attribute")
def _(r):
    p = pw(r, "!#%")
    return f'<input type="text" value="password=&quot;{p}&quot;" />', p


@family("base64-wrapped-env")
def _(r):
    p = pw(r)
    blob = b64(f"DB_USER=app\nDB_PASSWORD={p}\n")
    return f"echo {blob} | base64 -d > .env", blob


@family("pem-split-in-code")
def _(r):
    body = pem_body(r)
    return (f'key = ("-----BEGIN PRIVATE KEY-----\\n"\n       "{body}\\n"\n'
            '       "-----END PRIVATE KEY-----\\n")'), body  # fmt: skip


@family("pem-base64-wrapped")
def _(r):
    pem = f"-----BEGIN RSA PRIVATE KEY-----\n{pem_body(r)}\n-----END RSA PRIVATE KEY-----\n"
    v = b64(pem)
    return f"tls.key: {v}", v


@family("secret-on-next-line")
def _(r):
    p = pw(r)
    return f"DB_PASSWORD=\\\n{p}", p


@family("token-in-markdown-table")
def _(r):
    t = token(r)
    return f"| env | token |\n|---|---|\n| prod | `{t}` |", t


# --- vendor token formats as they come ----------------------------------------------------------

_VENDOR = {
    "vendor-cloudflare-cfat": lambda r: "cfat_" + mixed(r, 40),
    "vendor-heroku-hrku": lambda r: "HRKU-" + mixed(r, 60, ALNUM + "_"),
    "vendor-netlify-nfp": lambda r: "nfp_" + mixed(r, 36),
    "vendor-replicate-r8": lambda r: "r8_" + mixed(r, 37),
    "vendor-typeform-tfp": lambda r: "tfp_" + mixed(r, 44),
    "vendor-readme-rdme": lambda r: "rdme_" + chars(r, 70, string.ascii_lowercase + string.digits),
    "vendor-circleci-ccipat": lambda r: "CCIPAT_" + mixed(r, 22) + "_" + chars(r, 40, HEX),
    "vendor-llamacloud-llx": lambda r: "llx-" + mixed(r, 48),
    "vendor-postman-pmat": lambda r: "PMAT-" + chars(r, 26, string.ascii_uppercase + string.digits),
    "vendor-adafruit-aio": lambda r: "aio_" + mixed(r, 28),
    "vendor-groq-gsk": lambda r: "gsk_" + mixed(r, 52),
    "vendor-perplexity-pplx": lambda r: "pplx-" + mixed(r, 48),
    "vendor-xai": lambda r: "xai-" + mixed(r, 80),
    "vendor-openrouter": lambda r: "sk-or-v1-" + chars(r, 64, HEX),
    "vendor-linear-webhook": lambda r: "lin_wh_" + mixed(r, 40),
    "vendor-resend": lambda r: "re_" + mixed(r, 8) + "_" + mixed(r, 24),
    "vendor-planetscale": lambda r: "pscale_tkn_" + mixed(r, 43),
    "vendor-supabase": lambda r: "sbp_" + chars(r, 40, HEX),
    "vendor-pulumi": lambda r: "pul-" + chars(r, 40, HEX),
    "vendor-dockerhub-pat": lambda r: "dckr_pat_" + mixed(r, 27, ALNUM + "_-"),
    "vendor-grafana-sa": lambda r: "glsa_" + mixed(r, 32) + "_" + chars(r, 8, HEX),
    "vendor-age-secret-key": lambda r: "AGE-SECRET-KEY-1" + chars(r, 58, BECH32),
    "vendor-bcrypt-hash": lambda r: "$2b$12$" + chars(r, 53, ALNUM + "./"),
    "vendor-argon2-hash": lambda r: f"$argon2id$v=19$m=65536,t=3,p=4${chars(r, 22, B64)}$"
    + chars(r, 43, B64),
}  # fmt: skip
_VENDOR_CARRIERS = (
    "{t}",
    "export API_TOKEN={t}",
    "here is the key: {t}",
    'headers = {{"Authorization": "Bearer {t}"}}',
    "token {t} works on staging",
)
for _name, _make in _VENDOR.items():
    family(_name)(lambda r, m=_make: (lambda t: (r.choice(_VENDOR_CARRIERS).format(t=t), t))(m(r)))


def rows(per_family: int = PER_FAMILY, seed: int = 20261202) -> list[dict[str, str]]:
    out = []
    for name in sorted(FAMILIES):
        r = random.Random(f"{seed}:{name}")
        seen: set[str] = set()
        for _ in range(per_family):
            text, secret = FAMILIES[name](r)
            assert secret in text, (name, text, secret)
            if text in seen:
                continue
            seen.add(text)
            out.append({"source": "formats", "rule": name, "label": "tp", "text": text,
                        "secret": secret, "split": split_of(name)})  # fmt: skip
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    data = rows()
    notice = {"notice": "Generated by bench/secret_corpus_formats.py (memflow); secrets are "
              "random and fake."}  # fmt: skip
    write_corpus(args.out, notice, data)
    held = sum(r["split"] == "held_out" for r in data)
    print(f"{len(data)} lines, {len(FAMILIES)} families ({held} held-out lines) -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
