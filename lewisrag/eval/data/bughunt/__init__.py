"""The BugHunt sample: sample.json, kb.jsonl, labels.jsonl; load it with lewisrag.eval.bughunt."""
