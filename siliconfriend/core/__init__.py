"""The companion core: one turn (companion), the end-of-day consolidation, and the prompts."""
