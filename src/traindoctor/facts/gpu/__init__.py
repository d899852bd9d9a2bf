"""GPU efficiency: host-device synchronisations, optimizer kernels, memory formats, TF32."""
