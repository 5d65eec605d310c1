"""One module per emulated AWS service: what moto lacks or does differently, completed as AWS behaves."""
