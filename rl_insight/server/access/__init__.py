"""Who is asking and what they may do: named tokens with a role and projects (tokens.py), and the principal a
request resolves to (principal.py). The rules themselves are applied by server/security.py's dependencies."""
