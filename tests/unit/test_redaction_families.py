"""The families the redactor claims, each in the forms people write it: the secret goes, the
text around it stays (`kept`). Secrets are generated here (seeded), never literal."""

from __future__ import annotations

import random
import string
from dataclasses import dataclass

import pytest

from schemas.redaction import contains_secret, redact

R = random.Random(20261202)
ALNUM = string.ascii_letters + string.digits
B64 = ALNUM + "+/"
HEX = "0123456789abcdef"


def rs(n: int, alphabet: str = ALNUM) -> str:
    return "".join(R.choice(alphabet) for _ in range(n))


@dataclass(frozen=True)
class Case:
    id: str
    text: str
    secret: str
    kept: tuple[str, ...] = ()


def _cases() -> list[Case]:
    c: list[Case] = []

    def add(id: str, template: str, secret: str, *kept: str) -> None:
        c.append(Case(id, template.format(s=secret), secret, kept))

    # vendor tokens (the rule set and memflow's prefixes)
    add("slack_refresh", "refresh token {s} expires", f"xoxe-1-{rs(140)}", "refresh token")
    add("slack_config", "cfg {s}", f"xoxe.xoxp-1-{rs(160)}", "cfg ")
    add("stripe_webhook", "STRIPE_WEBHOOK_SECRET={s}", f"whsec_{rs(32)}", "STRIPE_WEBHOOK_SECRET=")
    add("stripe_webhook_prose", "the signing secret {s} rotates", f"whsec_{rs(32)}", "rotates")
    add("docker_pat", "docker login -u me --password-stdin <<< {s}", f"dckr_pat_{rs(27)}")
    add("google_oauth", "Authorization: Bearer {s}", "ya29." + rs(120, ALNUM + "_-"))
    add("google_oauth_bare", "token {s} from gcloud", "ya29." + rs(90, ALNUM + "_-"), "gcloud")
    add("google_client_secret", "client secret {s}", "GOCSPX-" + rs(28, ALNUM + "_-"))
    add("age", "key: {s}", "AGE-SECRET-KEY-1" + rs(58, "QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L"))
    add("grafana", "GRAFANA_TOKEN={s}", f"glsa_{rs(32)}_{rs(8, HEX)}")
    add("supabase", "token {s}", f"sbp_{rs(40, HEX)}")
    add("pulumi", "PULUMI_ACCESS_TOKEN={s}", f"pul-{rs(40, HEX)}")
    add("notion", "notion {s}", f"ntn_{rs(11, string.digits)}{rs(35)}")
    add("newrelic", "key {s} for the agent", "NRAK-" + rs(27, string.ascii_uppercase + "0123"))
    add("sentry", "SENTRY_AUTH_TOKEN={s}", "sntrys_" + rs(60, B64) + "=_" + rs(43))
    add("doppler", "DOPPLER_TOKEN={s}", f"dp.st.prd.{rs(40)}")
    add("fly", "FLY_API_TOKEN='FlyV1 {s}'", "fm2_" + rs(200, B64))
    add("planetscale", "pw {s}", "pscale_pw_" + rs(43, ALNUM + "_-"))
    add("azure_devops_old", "AZURE_DEVOPS_PAT={s}", rs(52, "abcdefghijklmnopqrstuvwxyz234567"))
    add("azure_devops_new", "ado pat {s}", rs(52) + "JQQJ99" + rs(2) + "AZDO" + rs(20))
    add("sanctum", "Authorization: Bearer {s}", f"12|{rs(40)}", "Authorization: Bearer ")
    add("okta", "Authorization: SSWS {s}", "00" + rs(40, ALNUM + "_-"), "Authorization: SSWS ")
    add("apim", "Ocp-Apim-Subscription-Key: {s}", rs(32, HEX), "Ocp-Apim-Subscription-Key: ")
    # *_KEY / *_SECRET names
    add("rails", "RAILS_MASTER_KEY={s}", rs(32, HEX), "RAILS_MASTER_KEY=")
    add("laravel", "APP_KEY=base64:{s}", rs(43, B64) + "=", "APP_KEY=base64:")
    add("fernet", "FERNET_KEY={s}", rs(43, ALNUM + "-_") + "=", "FERNET_KEY=")
    add("encryption", "ENCRYPTION_KEY: {s}", rs(64, HEX), "ENCRYPTION_KEY: ")
    add("signing", 'signing_key = "{s}"', rs(40), 'signing_key = "')
    # connection strings and URLs
    add("url_slash", "postgres://app:{s}@db.internal:5432/pay", "pa/ss" + rs(6),
        "postgres://app:", "@db.internal:5432/pay")  # fmt: skip
    add("url_hash", "postgres://app:{s}@db.internal:5432/pay", "pa#ss" + rs(6),
        "postgres://app:", "@db.internal:5432/pay")  # fmt: skip
    add("url_at", "amqp://svc:{s}@mq.local/vhost", "p@ss" + rs(6), "@mq.local/vhost")
    # command lines and configuration
    add("mariadb", "mariadb -h db -u app -p{s} payments", "S3cret" + rs(6), "payments")
    add("curl_U", "curl -U proxyuser:{s} https://x.test", "Pr0xy" + rs(6), "proxyuser:")
    add(
        "curl_proxy_user",
        "curl --proxy-user u:{s} https://x.test",
        "Pr0xy" + rs(6),
        "--proxy-user u:",
    )
    add("netrc_reversed", "machine api.test\n  password {s}\n  login deploy", "Netrc9" + rs(5),
        "login deploy")  # fmt: skip
    add("redis_conf", "bind 0.0.0.0\nrequirepass {s}\n", "Red1s" + rs(8), "requirepass ")
    add("redis_config_set", "redis-cli CONFIG SET requirepass {s}", "Red1s" + rs(8), "CONFIG SET ")
    add("redis_in_prose", "vault with requirepass {s} inside", "o8aOEH" + rs(6), "vault with ")
    add("oracle", "sqlplus scott/{s}@orcl", "T1ger" + rs(4), "sqlplus scott/", "@orcl")
    add(
        "keytool",
        "keytool -list -keystore a.p12 -storepass {s}",
        "Ch4nge" + rs(4) + "!",
        "-storepass ",
    )
    add("influx", "influx -username admin -password {s}", "Infl0x" + rs(5), "-username admin")
    add("lftp", "lftp -u deploy,{s} sftp://host", "Ftp9" + rs(6), "lftp -u deploy,")
    add("xfreerdp", "xfreerdp /v:host /u:admin /p:{s}", "Rdp9" + rs(6), "/u:admin /p:")
    # prose
    add("typographic", "my password is “{s}”", "Sup3r " + rs(6), "my password is “")
    add("de_no_copula", "Passwort {s}", "Sommer2024" + R.choice("!?#"))
    add("ru_no_dash", "пароль от базы {s}", "Qwerty" + rs(4, string.digits), "пароль от базы ")
    add("fr_mdp", "mdp : {s}", "Soleil" + rs(4, string.digits), "mdp : ")
    add("zh", "口令：{s}", "Hunter2" + rs(3), "口令：")
    add("ko", "암호는 {s}", "Hunter2" + rs(3), "암호는 ")
    add("it", "la password è {s}", "Hunter2" + rs(3), "la password è ")
    add("cs", "heslo je {s}", "Hunter2" + rs(3), "heslo je ")
    add("fi", "salasana on {s}", "Hunter2" + rs(3), "salasana on ")
    add("vi", "mật khẩu là {s}", "Hunter2" + rs(3), "mật khẩu là ")
    add("el", "ο κωδικός είναι {s}", "Hunter2" + rs(3), "ο κωδικός είναι ")
    add("ar", "كلمة المرور هي {s}", "Hunter2" + rs(3), "كلمة المرور هي ")
    add("hi", "पासवर्ड है {s}", "Hunter2" + rs(3), "पासवर्ड है ")
    add("id", "kata sandi adalah {s}", "Hunter2" + rs(3), "kata sandi adalah ")
    add("hu", "a jelszó: {s}", "Hunter2" + rs(3), "a jelszó: ")
    add("hr", "lozinka je {s}", "Hunter2" + rs(3), "lozinka je ")
    add("he", "הסיסמה: {s}", "Hunter2" + rs(3))
    # key material
    add("pem_url", "key=-----BEGIN%20PRIVATE%20KEY-----%0A{s}%0A-----END%20PRIVATE%20KEY-----&x=1",
        rs(64, ALNUM), "&x=1")  # fmt: skip
    vpn = "OpenVPN Static key V1-----"
    add("openvpn", f"-----BEGIN {vpn}\n{{s}}\n-----END {vpn}",
        "\n".join(rs(32, HEX) for _ in range(4)))  # fmt: skip
    add("openssh_body", "id_ed25519 body:\n{s}\n", "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ"
        + rs(40, B64) + "\n" + rs(70, B64), "id_ed25519 body:")  # fmt: skip
    add("pkcs8_body", "here: {s} end", "MIIEvQIBADANBgkqhkiG9w0BAQEFAASC" + rs(90, B64), " end")
    add("pem_second_half", "rest of it:\n{s}\n-----END RSA PRIVATE KEY-----\nthanks",
        "\n".join(rs(64, B64) for _ in range(3)), "rest of it:", "thanks")  # fmt: skip
    add("jwk_d", '{{"kty":"EC","crv":"P-256","x":"XX","d":"{s}"}}'.replace("XX", rs(43)),
        rs(43, ALNUM + "-_"), '"kty":"EC"')  # fmt: skip
    add("k8s_tls", "apiVersion: v1\nkind: Secret\ndata:\n  tls.key: {s}\n  tls.crt: abc\n",
        rs(120, B64) + "=", "tls.key: ", "kind: Secret")  # fmt: skip
    add("k8s_dockerconfig",
        "kind: Secret\ntype: kubernetes.io/dockerconfigjson\ndata:\n  .dockerconfigjson: {s}\n",
        "eyJhdXRocyI6" + rs(60, B64), ".dockerconfigjson: ")  # fmt: skip
    # a secret's name and its value with no sign between; credentials passed to a call
    add("bare_secret", "nimble SECRET {s}", rs(30), "nimble SECRET ")
    add("bare_prose_token", "the deploy token {s} expires", rs(36), "the deploy token ", "expires")
    add("call_login", 'server.login("alerts@acme.example", "{s}")', "Xk9" + rs(9), "server.login(")
    add("call_connect", 'mysqli_connect("db", "root", "{s}", "shop")', "Pw4" + rs(9), '"shop")')
    add("call_setopt", 'curl_easy_setopt(c, CURLOPT_PASSWORD, "{s}");', "Cu7" + rs(9),
        "CURLOPT_PASSWORD")  # fmt: skip
    # connection strings without `scheme://`, Windows and PowerShell commands
    add("go_mysql_dsn", 'dsn := "app:{s}@tcp(db:3306)/shop"', "G0" + rs(10), "@tcp(db:3306)")
    add("oracle_thin", "jdbc:oracle:thin:scott/{s}@db:1521/ORCL", "T1" + rs(8), "@db:1521/ORCL")
    add("ssh_keygen", "ssh-keygen -t ed25519 -N '{s}' -f key", "Ph4" + rs(9), "-f key")
    add("net_use", "net use Z: \\\\fs\\share {s} /user:ACME\\svc", "N3t" + rs(8), "/user:")
    add("cmdkey", "cmdkey /add:fs /user:svc /pass:{s}", "Cm4" + rs(8), "/user:svc")
    add("securestring", 'ConvertTo-SecureString "{s}" -AsPlainText -Force', "Ps7" + rs(9),
        "-AsPlainText")  # fmt: skip
    # encodings: HTML references, a percent-encoded query inside another, a PEM in base64
    add("html_quot", "password: &quot;{s}&quot;", "Ht9" + rs(9), "&quot;")
    add("percent_nested", "state=ts%3D1%26token%3D{s}%26x%3D2", rs(32), "%26x%3D2")
    pem = "-----BEGIN PRIVATE KEY-----\n" + rs(64, B64) + "\n-----END PRIVATE KEY-----\n"
    add("pem_base64", "  tls.key: {s}\n", __import__("base64").b64encode(pem.encode()).decode())
    # password hashes and tokens of vendors no rule set names
    add("bcrypt", "admin:{s}:19000", "$2b$12$" + rs(53, ALNUM + "./"), "admin:", ":19000")
    add("sha512crypt", "root:{s}:19000:0", "$6$" + rs(16) + "$" + rs(86, ALNUM + "./"), "root:")
    add("new_vendor", "export FOO={s}", "zq9_" + rs(40), "export FOO=")
    add("alibaba", "f.write(LTAI" + rs(20) + ", {s})", rs(30), "f.write(LTAI")
    # e-mail addresses
    add("email_idn", "mail {s} now", "jürgen@bücher.de", "mail ", " now")
    add("email_pct40", "?user={s}&x=1", "jane.doe%40example.com", "?user=", "&x=1")
    add(
        "email_after_slash",
        "s3://bucket/{s}/file.txt",
        "jane@example.com",
        "s3://bucket/",
        "/file.txt",
    )
    add("email_file", "saved report_{s}.pdf", "bob@corp.example.io", ".pdf")
    return c


CASES = _cases()


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_the_secret_goes_and_the_text_stays(case: Case) -> None:
    out = redact(case.text)
    assert out is not None
    for part in case.secret.split("\n"):
        assert part not in out, out
    for kept in case.kept:
        assert kept in out, out
    assert "[REDACTED:" in out
    assert redact(out) == out
    assert not contains_secret(out)


@pytest.mark.parametrize(
    "text",
    [
        "sort_key: created_at",
        'cache_key = f"user:{uid}"',
        "primary_key=id",
        "publicKey = MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE",
        "https://host:8080/path@v2",
        "git+ssh://git@github.com:org/repo.git",
        "ssh://git@example.com/org/repo",
        "react@18.2.0 and icon@2x.png",
        "openssl enc -pass env:PASS -in a",
        "the MDP is solved by value iteration",
        "암호화는 AES-256 으로 합니다",
        "kind: ConfigMap\ndata:\n  color: blue\n",
        "-----BEGIN PUBLIC KEY-----\nMIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEA\n"
        "-----END PUBLIC KEY-----",
        "heslo je povinné",
        "salasana on pakollinen",
        'login("admin", "admin")',
        'auth("user", "Please sign in")',
        "the cache key 3f2a9c1e8b7d4a6f5e0c9b8a7d6e5f4a was rebuilt",
        "call toolu_01A2b3C4d5E6f7G8h9I0j1K2L3m4 returned",
        "see msg_01HqR5vXn2kLp9WzT4bYcJ8sMd and req_011CVxyzAbCdEfGhIjKlMnOp",
        "integrity sha512-Zq9Xw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0Fe9Dc8Ba7Zq9Xw8Vu7Ts6Rq",
        "a_very_long_snake_case_function_name_for_tests()",
        "&amp; &lt;b&gt; R&amp;D costs 100%25 of 50%3A50",
        '{"predicate": "KEPT_SECRET", "object": "his mobile game development"}',  # LoCoMo
        "the requirepass directive is set in redis.conf",
        "set masterauth to the same value on replicas",
    ],
)
def test_what_is_no_secret_stays(text: str) -> None:
    assert redact(text) == text
