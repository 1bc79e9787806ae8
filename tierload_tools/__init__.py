"""Tools beside the library: `tierload bench` (the side-by-side benchmark), `tierload demo`,
and the local S3 server tests and demos start. `import tierload` never loads them."""
