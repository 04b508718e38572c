"""What the HTTP services share (serve's OpenAI-compatible API and the studio): bearer tokens and scopes, and the
JSON errors. Part of the ground, so neither component imports the other for them."""
