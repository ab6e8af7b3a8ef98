"""What to try next: random, evolutionary, transfer and mirror proposers; the learned policy."""
