"""What runs in the training process and its DataLoader workers: `TieredDataset`, the epoch
reader, resumption, collation, device output and data-stall accounting."""
