// Runs once when Gremlin Server starts. memflow never sends scripts; this only binds the
// traversal source `g` that gremlinpython's bytecode is evaluated against.

// memflow looks elements up by business keys (it never chooses element ids), so index them.
graph.createIndex('entity_id', Vertex.class)
graph.createIndex('fact_id', Edge.class)
// Every read is scoped: without these, `memflow status` counting each tenant (counts_many)
// scanned the whole graph once per tenant.
graph.createIndex('tenant_id', Vertex.class)
graph.createIndex('tenant_id', Edge.class)

def globals = [:]
globals << [g : traversal().with(graph)]
