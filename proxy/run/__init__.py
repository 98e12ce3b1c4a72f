"""Running admitted queries: the query pool, deadlines, padded answer times, automatic bounds' two steps."""
