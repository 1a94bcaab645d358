// Runs once when JanusGraph's Gremlin Server starts. memflow sends bytecode only; this declares
// its schema (idempotently) and binds the traversal source `g` the bytecode runs against.
//
// The schema is what memflow's GremlinGraphStore writes (resources/graph/gremlin.py):
// `entity` vertices and `fact` edges found by business keys inside a (tenant_id, ns) scope.
// Composite indexes make those lookups index reads instead of full scans; they are created
// with their keys, so they are ENABLED at once (no reindex). Against a graph created earlier
// without them, run the same statements once and reindex (JanusGraph's ManagementSystem docs).

import org.janusgraph.core.Cardinality
import org.janusgraph.core.Multiplicity

def mgmt = graph.openManagement()
try {
    def key = { String name, Class type ->
        mgmt.getPropertyKey(name) ?: mgmt.makePropertyKey(name).dataType(type).cardinality(Cardinality.SINGLE).make()
    }
    ['tenant_id', 'ns', 'entity_id', 'name', 'aliases', 'types', 'row_hash', 'version',
     'fact_id', 'subject_id', 'subject', 'predicate', 'object_id', 'object',
     'supersedes', 'superseded_by', 'session_id', 'turn_id', 'client', 'model', 'source'].each { key(it, String) }
    key('confidence', Double)
    key('valid_from', Long)
    key('valid_to', Long)
    ['entity', 'memflow_scope'].each { mgmt.getVertexLabel(it) ?: mgmt.makeVertexLabel(it).make() }
    mgmt.getEdgeLabel('fact') ?: mgmt.makeEdgeLabel('fact').multiplicity(Multiplicity.MULTI).make()

    def index = { String name, Class element, List<String> keys ->
        if (!mgmt.containsGraphIndex(name)) {
            def builder = mgmt.buildIndex(name, element)
            keys.each { builder.addKey(mgmt.getPropertyKey(it)) }
            builder.buildCompositeIndex()
        }
    }
    index('memflow_v_scope', Vertex, ['tenant_id', 'ns'])
    index('memflow_v_entity', Vertex, ['tenant_id', 'ns', 'entity_id'])
    index('memflow_e_scope', Edge, ['tenant_id', 'ns'])
    index('memflow_e_fact', Edge, ['tenant_id', 'ns', 'fact_id'])
    mgmt.commit()
} catch (Exception e) {
    mgmt.rollback()
    throw e
}

def globals = [:]
globals << [g : traversal().withEmbedded(graph)]
