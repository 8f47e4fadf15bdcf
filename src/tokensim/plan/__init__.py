"""Planning: vectorized deployment search, Pareto fronts, gap explanations."""
