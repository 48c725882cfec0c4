"""Analysis scripts: tables, heatmaps and rankings from Parquet result directories (docs/analysis.md)."""
