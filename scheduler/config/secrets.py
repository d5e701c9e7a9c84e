"""How strong the door's secrets are (README, Security): TINYAWS_API_KEY and AGENT_JOIN_KEY
must be too strong to guess, since a right one is always served whatever its address got
wrong before (api/guesses.py). A process that holds them (serve, worker, up) refuses at start
one whose estimate is under STRONG_BITS, naming the variable, as for any setting that does
not parse; the command-line client sends whatever key it has.

The estimate is a random key's: its length times log2 of the alphabet its character classes
span (lowercase, uppercase, digits, ASCII punctuation, anything else). A key made by a person
(a word, a name, a repeated pattern) is weaker than its estimate: make one with MAKE_ONE.
"""

from __future__ import annotations

import math
import string

from scheduler.config import ConfigError, Settings

# 2**128 keys: at a million guesses a second, about 10**25 years to try half of them.
STRONG_BITS = 128
MAKE_ONE = "python3 -c 'import secrets; print(secrets.token_urlsafe(32))'"
# (class, its size): a character outside the ASCII ones counts as one of 128 more.
CLASSES = (
    (frozenset(string.ascii_lowercase), 26),
    (frozenset(string.ascii_uppercase), 26),
    (frozenset(string.digits), 10),
    (frozenset(string.punctuation + " "), len(string.punctuation) + 1),
)
OTHER = 128
KNOWN = frozenset().union(*(chars for chars, _ in CLASSES))


def strength_bits(secret: str) -> float:
    """The estimated bits of `secret`: its length x log2(the size of the alphabet spanned by
    the character classes it uses); 0 for ""."""
    seen = set(secret)
    alphabet = sum(size for chars, size in CLASSES if seen & chars)
    if seen - KNOWN:
        alphabet += OTHER
    return len(secret) * math.log2(alphabet) if alphabet > 1 else 0.0


def check_secret(name: str, secret: str) -> None:
    """ConfigError naming `name` when `secret` is set and estimated under STRONG_BITS."""
    if not secret:
        return
    bits = strength_bits(secret)
    if bits < STRONG_BITS:
        raise ConfigError(
            f"{name}: about {bits:.0f} bits ({len(secret)} characters), below the "
            f"{STRONG_BITS} a key needs so that guessing it is hopeless (README, Security). "
            f"Make one with: {MAKE_ONE}"
        )


def check_secrets(settings: Settings) -> None:
    """TINYAWS_API_KEY and AGENT_JOIN_KEY, each when set (check_secret)."""
    check_secret("TINYAWS_API_KEY", settings.api_key)
    check_secret("AGENT_JOIN_KEY", settings.agent_join_key)
