-- Which nodes hold each archive kept on two nodes (issue 30): a computer's snapshot, a
-- tenant's template layer, a stopped instance on its way to another node. When a holder
-- is lost, a cluster job has another live node fetch a copy, so two remain.
CREATE TABLE blob_copies (
    sha256 TEXT NOT NULL,
    node TEXT NOT NULL,
    PRIMARY KEY (sha256, node)
)
