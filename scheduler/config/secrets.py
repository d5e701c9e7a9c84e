"""How strong the door's secrets are (docs/SECURITY.md): TINYAWS_API_KEY and AGENT_JOIN_KEY
must be too strong to guess, since a right one is always served whatever its address got
wrong before (api/guesses.py). A process that holds them (serve, worker, up) refuses at start
one whose estimate is under STRONG_BITS, or that is not printable ASCII (an HTTP header
carries it), naming the variable, as for any setting that does not parse; the command-line
client sends whatever key it has.

The estimate is a random key's: its length times log2 of the alphabet its character classes
span (lowercase, uppercase, digits, ASCII punctuation, anything else); hex (with or without
dashes, as a UUID writes it) is 4 bits a digit, and a key repeating a unit (at least twice,
"aaaa...", "passwordpassword...") is worth its unit. A UUID (uuidgen) counts as its 32 hex
digits, 128 bits: 122 of them are random, as hopeless to guess. A key made by a person (a
word, a passphrase, a name) is weaker than its estimate: make one with MAKE_ONE.
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
HEX = frozenset(string.hexdigits)


def strength_bits(secret: str) -> float:
    """The estimated bits of `secret`: those of the unit it repeats, if it does; 4 a digit
    for hex; else its length x log2(the size of the alphabet spanned by the character
    classes it uses). 0 for ""."""
    secret = repeated_unit(secret)
    seen = set(secret)
    if seen <= HEX | {"-"} and seen & HEX - set(string.digits):
        return 4.0 * sum(1 for char in secret if char != "-")
    alphabet = sum(size for chars, size in CLASSES if seen & chars)
    if seen - KNOWN:
        alphabet += OTHER
    return len(secret) * math.log2(alphabet) if alphabet > 1 else 0.0


def repeated_unit(secret: str) -> str:
    """The shortest unit `secret` is made of, repeated at least twice (a part of it may end
    it), else `secret`: its smallest period, from its longest border (a prefix that is also
    a suffix), found in linear time."""
    border = [0] * len(secret)
    matched = 0
    for i in range(1, len(secret)):
        while matched and secret[i] != secret[matched]:
            matched = border[matched - 1]
        if secret[i] == secret[matched]:
            matched += 1
        border[i] = matched
    period = len(secret) - (border[-1] if secret else 0)
    return secret[:period] if period <= len(secret) // 2 else secret


def check_secret(name: str, secret: str) -> None:
    """ConfigError naming `name` when `secret` is set and is not printable ASCII, or is
    estimated under STRONG_BITS."""
    if not secret:
        return
    if not (secret.isascii() and secret.isprintable()):
        # A header carries it: httpx (the client, the agent, `up`) cannot send anything else,
        # and the agent routes read a header as latin-1 where a client sent its UTF-8.
        raise ConfigError(
            f"{name}: printable ASCII only, as an HTTP header carries it. Make one with: {MAKE_ONE}"
        )
    bits = strength_bits(secret)
    if bits < STRONG_BITS:
        raise ConfigError(
            f"{name}: about {bits:.0f} bits ({len(secret)} characters), below the "
            f"{STRONG_BITS} a key needs so that guessing it is hopeless (docs/SECURITY.md). "
            f"Make one with: {MAKE_ONE}"
        )


def check_secrets(settings: Settings) -> None:
    """TINYAWS_API_KEY and AGENT_JOIN_KEY, each when set (check_secret)."""
    check_secret("TINYAWS_API_KEY", settings.api_key)
    check_secret("AGENT_JOIN_KEY", settings.agent_join_key)
