import { Migration } from "@mikro-orm/migrations";

/**
 * The money invariants the code keeps, held by the schema too (docs/architecture.md#conservation-of-money):
 * a wallet never holds more than it has posted (every grant takes from posted − held, every
 * charge releases its hold in the same statement or before), and a usage record's cost is never
 * negative and is exactly its platform fee plus its hoster's earning. Existing rows are verified
 * first, so a database that already broke one stops the migration with the count, rather than
 * failing on an opaque constraint error.
 */
export class Migration20270130000000MoneyChecks extends Migration {
  override async up(): Promise<void> {
    this.addSql(`do $$
      declare
        wallets_over int;
        records_off int;
      begin
        select count(*) into wallets_over from wallets where held_micros > posted_micros;
        select count(*) into records_off from usage_records
          where cost_micros < 0 or platform_fee_micros < 0 or hoster_earned_micros < 0
             or platform_fee_micros + hoster_earned_micros <> cost_micros;
        if wallets_over > 0 or records_off > 0 then
          raise exception 'money checks: % wallet(s) hold more than they posted, % usage record(s) whose fee and earning do not make their cost; fix them before this migration',
            wallets_over, records_off;
        end if;
      end $$`);
    this.addSql(`alter table wallets add constraint wallets_held_within_posted check (held_micros <= posted_micros)`);
    this.addSql(
      `alter table usage_records add constraint usage_records_cost_split check (
         cost_micros >= 0 and platform_fee_micros >= 0 and hoster_earned_micros >= 0
         and platform_fee_micros + hoster_earned_micros = cost_micros)`,
    );
  }

  override async down(): Promise<void> {
    this.addSql(`alter table usage_records drop constraint usage_records_cost_split`);
    this.addSql(`alter table wallets drop constraint wallets_held_within_posted`);
  }
}
