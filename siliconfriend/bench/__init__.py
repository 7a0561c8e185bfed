"""``siliconfriend bench`` and the retrieval evaluation: synthetic data, fixtures and the measurements."""
