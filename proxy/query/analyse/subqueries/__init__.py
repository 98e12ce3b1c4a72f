"""Subqueries in WHERE: the semi-joins admitted (semi_joins.py) and the precise refusals of the rest (refused.py)."""
