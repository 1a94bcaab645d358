// Runs once when Gremlin Server starts. memflow never sends scripts; this only binds the
// traversal source `g` that gremlinpython's bytecode is evaluated against.

// memflow looks elements up by business keys (it never chooses element ids), so index them.
graph.createIndex('entity_id', Vertex.class)
graph.createIndex('fact_id', Edge.class)

def globals = [:]
globals << [g : traversal().with(graph)]
