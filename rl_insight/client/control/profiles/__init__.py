"""Profile requests in this process: arm, open a torch.profiler window at the step, upload the trace."""
