"""The promotion gate: a new weight version is a candidate that serves a canary share of new sessions until live
rewards and grades, with its held-out eval, promote it or roll it back; each decision is a record on
topics.decisions."""
