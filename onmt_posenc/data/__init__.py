"""The data side: transforms, INTERPOLATE's joining command, corpus preparation, the synthetic task, the Japanese chunker."""
