"""specinfer runtime: the engine configuration, its rules, and the exact vLLM command line."""
