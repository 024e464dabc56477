package pyrmq.interop;

import java.util.concurrent.TimeUnit;
import org.apache.rocketmq.broker.BrokerController;
import org.apache.rocketmq.broker.BrokerStartup;
import org.apache.rocketmq.remoting.RemotingClient;

/**
 * org.apache.rocketmq.broker.BrokerStartup (same arguments: -c broker.conf), then one prompt
 * registration with the name server.
 *
 * <p>Why: a 5.x broker registers only with name servers that its background scan has already
 * found reachable. At start-up that scan often has not finished when start() registers, and the
 * next registration comes 10 s later. This waits (up to 30 s) until the scan found a name server
 * and registers once more, exactly as the periodic task would. Brokers in controller or DLedger
 * mode are left alone: their registration follows their role.
 *
 * <p>Prints "REGISTERED brokerAddr" after that registration.
 */
public final class Broker {
    private static final long SCAN_WAIT_MS = 30_000;

    private Broker() {
    }

    public static void main(String[] args) throws InterruptedException {
        BrokerController controller = BrokerStartup.start(BrokerStartup.createBrokerController(args));
        if (controller == null
            || controller.getBrokerConfig().isEnableControllerMode()
            || controller.getMessageStoreConfig().isEnableDLegerCommitLog()
            || controller.getMessageStoreConfig().isDuplicationEnable()) {
            return;
        }
        RemotingClient client = controller.getBrokerOuterAPI().getRemotingClient();
        long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(SCAN_WAIT_MS);
        while (client.getAvailableNameSrvList().isEmpty() && System.nanoTime() < deadline) {
            Thread.sleep(20);
        }
        controller.registerBrokerAll(true, false, true);
        Common.out("REGISTERED " + controller.getBrokerAddr());
    }
}
