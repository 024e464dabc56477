"""pyrmq store package (`tag_filter` and `uniq_id`, pure, are shared with `pyrmq_client`)."""
