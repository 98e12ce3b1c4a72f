"""The HTTP contract end to end, on real servers: answers, errors, formats, repeats, the red team."""
