"""The S3 fast path: signed GETs on kept-alive HTTP/1.1 connections without aiobotocore."""
