"""`rftbus serve`: an OpenAI-compatible proxy that records live traffic as Experiences, and the feedback API."""
