"""Values rules: the declarative data of values-rules/ and the engine that applies it. Pure."""
