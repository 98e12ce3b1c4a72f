"""The discrete Gaussian: zCDP maps and error bars, and its proven μ-GDP bound."""
