"""lodtool: LoD (Level-of-Detail) tensors, their HDF5 container, and sequence operators."""
