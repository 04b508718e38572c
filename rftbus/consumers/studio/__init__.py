"""The studio: a browser console for the people in the loop (feedback queue, run dashboard, experience path)."""
