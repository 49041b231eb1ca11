"""The findings room (feature.py): what every detector found in a run, in one shape."""
