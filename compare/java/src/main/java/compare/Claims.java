package compare;

import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.SQLException;
import java.util.Collection;

import org.apache.kafka.common.TopicPartition;

/**
 * Claims records, in the run's compare_claims table, the partitions a
 * rebalance assigned to this member and the group generation of that
 * assignment (the harness's claim rule: a write under an older generation
 * after a claim at a newer one is a late write). It is called from the
 * consumer's onPartitionsAssigned, on a connection that is in no record's
 * transaction, and commits at once.
 */
final class Claims {
    static final String CLAIM_SQL = "INSERT INTO compare_claims (part, member, gen) VALUES (?, ?, ?)";

    private Claims() {
    }

    /**
     * Records one claim row per partition, in one transaction on conn
     * (autocommit off), retried three times; a claim that cannot be
     * recorded is logged as "claim not recorded", and the consumer goes on.
     */
    static void record(Connection conn, String member, Collection<TopicPartition> partitions, int gen) {
        if (partitions.isEmpty()) {
            return;
        }
        for (int attempt = 1; ; attempt++) {
            try (PreparedStatement st = conn.prepareStatement(CLAIM_SQL)) {
                for (TopicPartition tp : partitions) {
                    st.setInt(1, tp.partition());
                    st.setString(2, member);
                    st.setLong(3, gen);
                    st.addBatch();
                }
                st.executeBatch();
                conn.commit();
                return;
            } catch (SQLException e) {
                try {
                    conn.rollback();
                } catch (SQLException ignored) {
                }
                if (attempt >= 3) {
                    System.err.println("claim not recorded: " + partitions + " at generation " + gen + ": " + e);
                    return;
                }
            }
        }
    }
}
