"""Where jobs may go: the placement rule (pure) and the node sources (built-in or the
tiny-aws registry over HTTP). Depends only on the wire models."""
