"""Hypothesis without its per-example deadline: a deadline is a timed assertion, and on a
shared 2-core machine a slow example is load, not a bug (speed is proven by `make bench`)."""

from hypothesis import settings

settings.register_profile("memflow", deadline=None)
settings.load_profile("memflow")
