"""Agents' OpenTelemetry traces as experiences: OTLP bodies decoded to spans (otlp.py), GenAI spans read as model
calls with their messages (genai.py)."""
