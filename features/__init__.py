"""Visual feature stores (HDF5), converters from the formats the field distributes, and checks.

Knows nothing of models: it reads, writes and validates region features, boxes and geometry.
"""
