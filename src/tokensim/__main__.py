"""`python -m tokensim`: the same command as the `tokensim` console script."""
from tokensim.cli import main

if __name__ == "__main__":
    main()
