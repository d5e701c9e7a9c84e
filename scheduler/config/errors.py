"""A setting that cannot be used: the one error of the settings, its message naming the
variable (a module of its own so the setting parsers beside __init__.py raise it too)."""


class ConfigError(ValueError):
    """A setting has a value that cannot be used; the message names the variable."""
