"""Text to one sqlglot SELECT tree: the lexical gate, the parse, the BI wrapper's flattening."""
