"""A parsed SELECT against the catalog: the positive allow-list, by clause, to an Analysis."""
