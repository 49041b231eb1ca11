"""Trace parsers: torch.profiler, Nsight Systems, Ascend MSTX and verl logs into the one event table."""
