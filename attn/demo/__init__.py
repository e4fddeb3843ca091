"""The "I saw a saw" demo: a tiny part-of-speech tagger whose self-attention layer runs on the
(simulated) accelerator. ``attn demo`` runs it; :mod:`attn.demo.train` trains it."""
