"""HTTP plumbing shared by the server and the packages whose routes it mounts (context
intelligence): the error body every route answers, the JSON decoding errors a body may raise, and
the OpenAPI declarations of routes that read their raw body. It imports nothing of the server, so
`convograph.intelligence` can use it without reaching up the data flow."""
