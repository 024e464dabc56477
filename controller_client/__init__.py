"""pyrmq controller_client package."""
