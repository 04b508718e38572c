"""`rftbus simulate`: live agents (the OpenAI SDK against `rftbus serve`) and graders posting feedback."""
