package pyrmq.interop;

import java.util.HashSet;
import java.util.List;
import java.util.Set;
import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.MessageExt;

/**
 * Consumes with DefaultLitePullConsumer (subscribe mode, clustering, auto-commit) until expected
 * distinct keys have been received, or the timeout. Prints the same lines as PushConsume:
 *
 * <pre>
 *   RECEIVED key reconsumeTimes queueId queueOffset bodyBytes bodyCrc32 tags
 *   DONE distinctKeys                       (exit 0)
 *   TIMEOUT distinctKeys expected           (exit 3)
 * </pre>
 */
public final class LitePull {
    static final String USAGE = "LitePull <namesrv> <group> <topic> <tagExpression> <expected>"
        + " [--timeout-s=60] [--linger-ms=0] [--from=first|last] [--pull-threads=20]";

    private LitePull() {
    }

    public static void main(String[] argv) throws Exception {
        Common.Args args = Common.Args.parse(argv, 5, USAGE);
        String namesrv = args.get(0);
        String group = args.get(1);
        String topic = args.get(2);
        String tagExpression = args.get(3);
        int expected = args.getInt(4);
        int timeoutS = args.intOption("timeout-s", 60);
        int lingerMs = args.intOption("linger-ms", 0);
        String from = args.option("from", "first");
        Common.watchdog(timeoutS + lingerMs / 1000 + 15);

        DefaultLitePullConsumer consumer = new DefaultLitePullConsumer(group);
        Common.configureClient(consumer, namesrv, "litepull");
        consumer.setConsumeFromWhere("last".equals(from)
            ? ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET : ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        // One pull thread per queue at least: a pull that reaches the end of its queue is held by
        // the broker (long polling, up to 20 s) and blocks its thread for that long.
        consumer.setPullThreadNums(args.intOption("pull-threads", 20));
        consumer.setPollTimeoutMillis(500);
        consumer.setAutoCommitIntervalMillis(1000);
        consumer.setTopicMetadataCheckIntervalMillis(1000);
        consumer.subscribe(topic, tagExpression);
        consumer.start();

        Set<String> received = new HashSet<>();
        long deadline = System.currentTimeMillis() + timeoutS * 1000L;
        while (received.size() < expected && System.currentTimeMillis() < deadline) {
            record(consumer.poll(), received);
        }
        boolean reached = received.size() >= expected;
        long lingerDeadline = System.currentTimeMillis() + lingerMs;
        while (reached && System.currentTimeMillis() < lingerDeadline) {
            // Keep polling a little longer so that duplicates show up as extra RECEIVED lines.
            record(consumer.poll(Math.max(1, lingerDeadline - System.currentTimeMillis())), received);
        }
        consumer.commit();
        consumer.shutdown();
        if (reached) {
            Common.out("DONE " + received.size());
            System.exit(Common.EXIT_OK);
        }
        Common.out("TIMEOUT " + received.size() + " " + expected);
        System.exit(Common.EXIT_TIMEOUT);
    }

    private static void record(List<MessageExt> msgs, Set<String> received) {
        for (MessageExt msg : msgs) {
            Common.printReceived(msg);
            received.add(msg.getKeys() == null ? "-" : msg.getKeys());
        }
    }
}
