"""pyrmq controller package."""
