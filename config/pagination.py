"""Pagination for every list endpoint: limit/offset, with a ceiling on both.

A limit over `max_limit` is cut to it (as DRF does), and an offset past the
end is the end: an offset too large for the database's integers would
otherwise fail in SQL.
"""

from rest_framework.pagination import LimitOffsetPagination


class Pagination(LimitOffsetPagination):
    default_limit = 200
    max_limit = 1000

    def paginate_queryset(self, queryset, request, view=None):
        self.request = request
        self.limit = self.get_limit(request)
        if self.limit is None:
            return None
        self.count = self.get_count(queryset)
        self.offset = min(self.get_offset(request), self.count)
        if self.count > self.limit and self.template is not None:
            self.display_page_controls = True
        if self.count == 0 or self.offset == self.count:
            return []
        return list(queryset[self.offset:self.offset + self.limit])
