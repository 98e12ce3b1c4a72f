"""The noise for every measure and the exact event to charge, and the cells it may touch."""
