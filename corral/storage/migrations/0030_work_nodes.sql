-- Where work under way runs (issue 30). A template build's `node` runs it (its actor
-- and its instance): requests for the build are forwarded there, and a lost node's
-- build is taken over from it. A version's `node` runs its publish: only that node's
-- restart (or its loss) cuts the publish off.
ALTER TABLE sandbox_template_builds ADD COLUMN node TEXT;
ALTER TABLE deployment_versions ADD COLUMN node TEXT
