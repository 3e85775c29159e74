"""The one exception type of ps_train."""


class PsError(RuntimeError):
    """An error of the shards or of the way to them, as the C++ client saw it.

    `code` is the gRPC status code (an int, as grpc.StatusCode's values), `code_name` its name
    ("UNAVAILABLE", "FAILED_PRECONDITION", ...) and `message` what the shard or the client said.
    """

    def __init__(self, code, code_name, message):
        super().__init__(f"{code_name}: {message}")
        self.code = code
        self.code_name = code_name
        self.message = message
