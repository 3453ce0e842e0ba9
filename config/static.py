"""Static files: compressed (gzip; Brotli too if the Brotli package is installed) and hashed by `collectstatic`,
served by WhiteNoise.

Pages name a file by its content hash (`allot.3f2a9c.css`), so browsers and proxies keep it for good and a
release can never be served a stale copy. Before `collectstatic` has run (a checkout: `make run`, the
tests) there is no manifest: names stay plain and WhiteNoise serves the files from the app folders.
"""

from whitenoise.storage import CompressedManifestStaticFilesStorage


class StaticStorage(CompressedManifestStaticFilesStorage):
    # A file that collectstatic did not see (none should exist) keeps its plain name instead of failing the page.
    manifest_strict = False

    def stored_name(self, name):
        if not self.hashed_files:
            return name
        return super().stored_name(name)
