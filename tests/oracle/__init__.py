"""Neighbouring-dataset oracles: the generated SQL on D and on D minus one unit, within the recorded sensitivity."""
