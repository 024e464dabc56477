"""pyrmq store package."""
