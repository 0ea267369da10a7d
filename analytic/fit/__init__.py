"""What holds the model to published numbers: the validation cases and their report, the calibration
of the step-time constants, the allocator's reserve, the memory outside it, and the executable
derivations."""
