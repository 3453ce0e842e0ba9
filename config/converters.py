"""URL converters: an id in a path is ASCII digits that fit the database's integer, else the URL matches nothing."""


class IdConverter:
    # Up to 18 digits: always below 2**63 (PostgreSQL bigint, SQLite INTEGER), so a lookup never overflows.
    regex = "[0-9]{1,18}"

    def to_python(self, value: str) -> int:
        return int(value)

    def to_url(self, value) -> str:
        return str(int(value))


# The same rule for the API's routers (lookup_value_regex).
ID_REGEX = IdConverter.regex
